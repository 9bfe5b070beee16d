"""The downstream consumer: students trained on SQL-defined mixes of the catalog's corpora (arms), compared.

    per arm: its mix (e.g. bitext; bitext + rejuvenated; 10 × bitext + paraphrases) → `training_mix`
      → per seed: a fairseq student [→ continued training from it on the arm's `continue_on` mix, own lr]
    per test set (read and validated, never deduplicated or filtered: conf/roles.py): each student translates it
      as soon as its arm is trained, while other arms train → sacrebleu BLEU + chrF (signatures kept) → `evaluations`
      (arm, seed), registered once every arm is done, in the arms' order; sacrebleu's paired bootstrap (+ approximate
      randomisation) of each arm's seeds concatenated against the baseline's → p_value, ci_low, ci_high; all
      translations in `test_translations`
    report: mean ± sd per arm, Δ vs the baseline and p, per test set (flows/reports/train_nmt_report.py)

Every model is a model stage: an arm whose mix, settings and seed did not change is not retrained.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow.compute as pc

from conf.errors import CatalogError, ConfError
from conf.schema import AugdagConf, NMTConf
from conf.sections.experiments import ArmConf, ContinueConf, NoisedTest, label_of
from flows.engine import registry
from flows.engine.at_once import at_once
from flows.engine.driver import ModelRef, Run, run_model_stage, run_source_stage, run_stage
from flows.engine.registry import Effect, Headline
from flows.engine.replay import run_logger
from flows.engine.runners import FlowConf, pipeline_flow
from flows.pipelines.heldout import check_heldout_overlap, without_overlaps
from flows.pipelines.ingest import ingest_dataset
from flows.pipelines.nmt import converted, nmt_model
from flows.reports.train_nmt_report import arm_summary, publish_report
from storage.artifacts import ArtifactRef
from storage.sql_guard import tables_read
from tasks.common.evaluation import EVALUATE
from tasks.common.mix import Mix, content_hash
from tasks.common.nmt import NMT_VERSION, decode_options, loading, runtime
from tasks.robustness.stage import NOISED_TEST
from tasks.train_nmt.experiments import TRANSLATE_STUDENT, continued_builder, continued_train_conf
from tasks.train_nmt.significance import ARM_TRANSLATIONS, PAIRED_SIGNIFICANCE

MIX_VERSION = "2"  # 2: the rows carry their arm and phase
_MISSING_VIEW = re.compile(r"Table with name (\w+) does not exist")


def default_mix(tests: list[str]) -> dict[str, str]:
    """Without a configured mix: every bitext row except the test sets'."""
    held_out = ", ".join("'" + t.replace("'", "''") + "'" for t in tests)
    return {"bitext": f"SELECT src, tgt FROM bitext WHERE source NOT IN ({held_out})"}


def select_mix(run: Run, mix: dict[str, str], key: str) -> dict[str, Any]:
    """Run each named query over the catalog's views (read-only); an error names the query's key and, for a view
    that does not exist, the pipeline that makes it."""
    selected = {}
    for name, sql in mix.items():
        try:
            selected[name] = run.catalog.query(sql)
        except (duckdb.Error, CatalogError) as e:
            raise ConfError(f"{key}.{name}: {e}. Hint: {missing_view_hint(str(e))}") from e
    return selected


def missing_view_hint(error: str) -> str:
    """The hint for a mix query's catalog ``error``: the pipeline that makes the missing view, or that none does, or
    a general hint when the error names no view."""
    view = m.group(1) if (m := _MISSING_VIEW.search(error)) else None
    makers = [p.name for p in registry.load().values() if view in p.views]
    if makers:
        return (
            f"the view `{view}` exists once the {' or '.join(makers)} pipeline has run: list it before "
            f"train_nmt in `pipelines`, or `augdag run {makers[0]}` first"
        )
    if view:
        return f"no pipeline makes a view `{view}` (`augdag views` lists them)"
    return "a view exists once the pipeline that makes it has run; `augdag sql` tries a query"


def arm_data(
    run: Run, conf: AugdagConf, arm: str, mix: dict[str, str], copies: dict[str, int], *, phase: str, key: str
) -> tuple[ArtifactRef, dict[str, int]]:
    """An arm's training (or continued-training) data, its ``Mix`` materialised as a `training_mix` artifact (the
    object ``augdag.samplers`` streams), and its rows per entry; a ``ConfError`` when it holds a line of a held-out
    set (flows/pipelines/heldout.py), before any model trains."""
    table = Mix(select_mix(run, mix, f"{key}.mix"), copies, arm=arm, phase=phase, key=key).table()
    if table.num_rows == 0:
        raise ConfError(f"{key}.mix: the queries selected no rows ({', '.join(mix)})")
    drop = conf.heldout.on_overlap == "drop"
    found = check_heldout_overlap(run, conf, f"{key}.mix", table, ("src", "tgt"), drop=drop)
    outputs = without_overlaps(table, found, conf.heldout.allow_overlap) if drop else {"part": table}
    table = outputs["part"]
    counts = {c["values"]: c["counts"] for c in pc.value_counts(table["source"]).to_pylist()}
    if empty := [name for name in mix if not counts.get(name)]:  # the arm would be another arm under a new name
        raise ConfError(f"{key}.mix.{empty[0]}: the query selected no rows (`augdag sql` shows what it selects)")
    ref = run_source_stage(
        run,
        name="training_mix",
        version=MIX_VERSION,
        produce=lambda: iter([(0, outputs)]),
        params={"arm": arm, "phase": phase, "mix": mix, "copies": copies},
        input_fingerprint=content_hash(table),
        view="training_mix",
        dataset=f"train_nmt.{arm}" + (".continue" if phase == "continue" else ""),
    )
    return ref, {name: counts[name] for name in mix}


@dataclasses.dataclass(frozen=True)
class Student:
    """One arm's student for one seed: ``trained``, the model fairseq trained (`models.name` student, or
    student_continued after continued training), which `evaluations` names; ``model``, the one that translates
    the test sets: ``trained`` itself, or its CTranslate2 conversion (`<name>_ct2`) under ``inference: ctranslate2``."""

    arm: str
    seed: int
    model: ModelRef
    trained: ModelRef


def continued(run: Run, conf: NMTConf, base: ModelRef, data: ArtifactRef, ct: ContinueConf, *, seed: int, label: str) -> ModelRef:
    """The arm's model trained on: fairseq-train from ``base``'s checkpoint on ``data`` at ``ct.lr``."""
    train = continued_train_conf(conf.train, lr=ct.lr, max_update=ct.max_update, warmup_updates=ct.warmup_updates, seed=seed)
    ref = run_model_stage(  # lineage: it descends from its data and from the model it continues
        run,
        name="student_continued",
        key="fairseq",
        version=NMT_VERSION,
        kind="fairseq",
        filename="model",
        inputs=[data, base],  # type: ignore[list-item] — run_model_stage reads only .fingerprint
        params={"train": train.model_dump(), "src": "src", "tgt": "tgt", "role": "part", "init": base.fingerprint},
        build=continued_builder(data.parts(), conf, train, init=base.path, label=f"{label} (continued)"),
    )
    return ref


def train_arm(run: Run, conf: AugdagConf, name: str, arm: ArmConf) -> tuple[list[Student], dict[str, Any]]:
    """The students of one arm, one per seed, and what they were trained on."""
    train_nmt = conf.train_nmt
    key = f"train_nmt.experiments.{name}" if train_nmt.experiments else "train_nmt"
    if train_nmt.student.model is not None and (len(train_nmt.arm_names()) > 1 or arm.continue_on is not None):
        raise ConfError(
            "train_nmt.student.model: a configured student is evaluated as it is, but arms train their "
            "own students on their mixes. Hint: unset `model`, or run one arm without `continue_on`"
        )
    data, rows = arm_data(run, conf, name, arm.mix, arm.copies, phase="train", key=key)
    ct_data, ct_rows = (
        arm_data(run, conf, name, arm.continue_on.mix, arm.continue_on.copies, phase="continue", key=f"{key}.continue_on")
        if arm.continue_on
        else (None, {})
    )
    label = arm.label or name
    students = []
    for seed in train_nmt.arm_seeds(name):
        student = train_nmt.student.model_copy(update={"train": train_nmt.student.train.model_copy(update={"seed": seed})})
        native = student.model_copy(update={"inference": "native"})  # the trained model; converted below
        trained = nmt_model(run, native, name="student", train_on=data)
        if arm.continue_on is not None and ct_data is not None:
            trained = continued(run, native, trained, ct_data, arm.continue_on, seed=seed, label=label)
        converts = student.inference == "ctranslate2" and student.backend != "ctranslate2"
        students.append(Student(name, seed, converted(run, student, trained) if converts else trained, trained))
    return students, {
        "label": label,
        "mix_rows": rows,
        "continue_rows": ct_rows,
        "seeds": train_nmt.arm_seeds(name),
        "continue_on": arm.continue_on.model_dump() if arm.continue_on else None,
        "mix": arm.mix,
        "copies": arm.copies,
        "students": [s.trained.fingerprint for s in students],
    }


def held_out_sets(run: Run, conf: AugdagConf) -> dict[str, ArtifactRef]:
    """Each test set of train_nmt by its name in evaluations: the held-out bitext as it is (never cleaned), or, for a
    noised entry ``{dataset: X, modifiers: ...}``, every pair of it with OpusTrainer's modifiers applied."""
    entries = conf.train_nmt.tests or [None]
    sets = {}
    for dataset, entry in zip(conf.train_nmt_test(), entries, strict=True):
        test = ingest_dataset(run, conf, dataset, held_out=True)
        if isinstance(entry, NoisedTest):
            params = {"seed": entry.seed, "modifiers": entry.entries()}
            test = run_stage(run, NOISED_TEST, inputs=[test], params=params, dataset=label_of(entry))
        sets[dataset if entry is None else label_of(entry)] = test
    return sets


def translated(run: Run, conf: AugdagConf, student: Student, test: ArtifactRef) -> tuple[ArtifactRef, list[dict[str, Any]]]:
    """One student's translations of one test set and their BLEU and chrF (sacrebleu, one row per metric)."""
    train_nmt = conf.train_nmt
    hyps = run_stage(
        run,
        TRANSLATE_STUDENT,
        inputs=[test],
        models=[student.model.fingerprint],
        resources={"model_path": student.model.location, "runtime": runtime(train_nmt.student)},
        params={
            "model": loading(train_nmt.student),
            "decode": decode_options(beam=train_nmt.beam, lenpen=train_nmt.lenpen, bound=train_nmt.student),
        },
    )
    return hyps, run_stage(run, EVALUATE, inputs=[hyps], n_shards=1, params={}).read(0).to_pylist()


def evaluate_students(
    run: Run,
    conf: AugdagConf,
    students: list[tuple[Student, ArtifactRef, list[dict[str, Any]]]],
    test_name: str,
    arms: dict[str, dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The paired test of each arm against the baseline on one test set, from every student's translations and
    scores (``translated``); the rows go to `evaluations`, one per student and metric, in the students' order."""
    train_nmt = conf.train_nmt
    systems = [{"arm": s.arm, "seed": s.seed, "model": s.model.fingerprint} for s, _, _ in students]
    outputs = [hyps for _, hyps, _ in students]
    gathered = run_stage(run, ARM_TRANSLATIONS, inputs=outputs, n_shards=1, params={"systems": systems, "testset": test_name})
    tests = (
        run_stage(
            run,
            PAIRED_SIGNIFICANCE,
            inputs=[gathered],
            n_shards=1,
            params={"baseline": train_nmt.baseline_arm(), "arms": list(arms), **train_nmt.significance.model_dump()},
        )
        .read(0)
        .to_pylist()
    )
    paired = {(t["arm"], t["metric"]): t for t in tests}
    rows = []
    for s, _, mine in students:
        mine = [{**e, **{k: paired[(s.arm, e["metric"])][k] for k in ("p_value", "ci_low", "ci_high")}} for e in mine]
        run.catalog.register_evaluation(
            run_id=run.run_id,
            model=s.trained.fingerprint,
            model_name="student",
            testset=test_name,
            scores=mine,
            arm=s.arm,
            seed=s.seed,
            meta=evaluation_meta(arms[s.arm], conf, [paired[(s.arm, e["metric"])] for e in mine], s),
        )
        for e in mine:
            said = f"({e['sentences']} sentences; arm {s.arm}, seed {s.seed})  {e['signature']}"
            run_logger().info(f"{e['metric']} = {e['score']:.2f} on {test_name} {said}")
        rows += [{"testset": test_name, "arm": s.arm, "seed": s.seed, "model": s.trained.fingerprint, **e} for e in mine]
    return rows, tests


def evaluation_meta(arm: dict[str, Any], conf: AugdagConf, tests: list[dict[str, Any]], student: Student) -> dict[str, Any]:
    """What an evaluation row keeps beside its score: the arm's data, its paired tests (per metric) and what
    translated the test set (``inference``: the backend and the fingerprint of the model that ran, the trained
    model's own or its CTranslate2 conversion's; the row's ``model`` is the trained one)."""
    sig = conf.train_nmt.significance
    ran = student.model.fingerprint
    backend = "ctranslate2" if ran != student.trained.fingerprint else conf.train_nmt.student.backend
    return {
        **{k: arm[k] for k in ("label", "mix", "copies", "mix_rows", "continue_on")},
        "inference": {"backend": backend, "model": ran},
        "baseline": conf.train_nmt.baseline_arm(),
        "significance": {
            "seeds": tests[0]["seeds"],
            "resamples": sig.resamples,
            "ar_trials": sig.ar_trials,
            "p_ar": {t["metric"]: t["p_ar"] for t in tests},
            "signature": {t["metric"]: t["signature"] for t in tests},
        },
    }


Translations = dict[str, list[tuple[Student, ArtifactRef, list[dict[str, Any]]]]]


def arm_translated(
    run: Run, conf: AugdagConf, name: str, arm: ArmConf, test_sets: Mapping[str, ArtifactRef]
) -> tuple[Translations, dict[str, Any]]:
    """``train_arm``, then each of its students' translations of every test set (``translated``): an arm's test
    sets are translated while the other arms train."""
    students, about = train_arm(run, conf, name, arm)
    done = {test_name: [(s, *translated(run, conf, s, test)) for s in students] for test_name, test in test_sets.items()}
    return done, about


def trained_arms(
    run: Run, conf: AugdagConf, arms: Mapping[str, ArmConf], test_sets: Mapping[str, ArtifactRef]
) -> dict[str, tuple[Translations, dict[str, Any]]]:
    """``arm_translated`` of every arm in the arms' order, ``train_nmt.parallel_arms`` at once (threads in copies of
    this context, each waiting on its fairseq process or its translations); a failed arm raises once all have ended
    (the rest is cached)."""
    calls = {name: functools.partial(arm_translated, run, conf, name, arm, test_sets) for name, arm in arms.items()}
    return at_once(calls, conf.train_nmt.parallel_arms)


def train_and_evaluate(run: Run, conf: AugdagConf) -> dict[str, Any]:
    """Train the students of every arm and seed and translate every test set with them, then score them with paired
    significance against the baseline arm; returns the run's ``train_nmt`` summary."""
    train_nmt = conf.train_nmt
    test_sets = held_out_sets(run, conf)
    trained = trained_arms(run, conf, train_nmt.arms(default_mix(conf.train_nmt_test())), test_sets)
    arms = {name: about for name, (_, about) in trained.items()}
    evaluation, significance = [], []
    for test_name in test_sets:
        students = [t for done, _ in trained.values() for t in done[test_name]]
        rows, paired = evaluate_students(run, conf, students, test_name, arms)
        evaluation += rows
        significance += [{"testset": test_name, **p} for p in paired]
    return {
        "baseline": train_nmt.baseline_arm(),
        "tests": list(test_sets),
        "arms": arms,
        "evaluation": evaluation,
        "significance": significance,
        "summary": arm_summary(evaluation, significance, train_nmt.baseline_arm(), arms),
    }


@pipeline_flow("train_nmt")
def train_nmt_flow(conf: FlowConf, profile: str = "", config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train and evaluate the students of every arm and seed; returns the run summary (also in the catalog)."""
    with Run.started(conf, pipeline="train_nmt", profile=profile, config=config) as run:
        result = train_and_evaluate(run, conf)
        reports = publish_report(run, result)
    return run.finish(extra={"train_nmt": result, "reports": reports})


def headline(s: Mapping[str, Any]) -> Headline:
    """A ``train_nmt`` run in one line: the students trained, and the baseline's mean BLEU on the first test set."""
    from flows.reports.effect_table import counted

    t = s["train_nmt"]
    students = sum(len(a["students"]) for a in t["arms"].values())
    test, label = t["tests"][0], t["arms"][t["baseline"]]["label"]
    base = next(r for r in t["summary"] if (r["testset"], r["arm"], r["metric"]) == (test, t["baseline"], "BLEU"))
    return Headline(counted(students, "student"), f"baseline {label} BLEU {base['mean']:.2f} on {test}")


def effects(s: Mapping[str, Any]) -> list[Effect]:
    """Each arm against the baseline per test set (the verdict table of a night): its Δ BLEU and chrF with the p
    that decides (``arm_verdict``), the views its mixes read that the baseline's do not, and the caveat: the
    seeds, and a baseline under BLEU 5 or chrF 20."""
    from flows.reports.effect_table import seeds_caveat
    from flows.reports.train_nmt_report import arm_verdict
    from flows.reports.verdicts import below_floor

    t, out = s["train_nmt"], []
    base_arm = t["arms"][t["baseline"]]
    base_views = {v for sql in base_arm["mix"].values() for v in tables_read(sql)}
    for test in t["tests"]:
        rows = {(r["arm"], r["metric"]): r for r in t["summary"] if r["testset"] == test}
        floor = below_floor({m: rows[(t["baseline"], m)]["mean"] for m in ("BLEU", "chrF")})
        for arm, a in t["arms"].items():
            if arm == t["baseline"]:
                continue
            mixes = [a["mix"], (a.get("continue_on") or {}).get("mix") or {}]
            views = {v for mix in mixes for sql in mix.values() for v in tables_read(sql)} - base_views
            n = len(a["seeds"])
            model = f"train_nmt {a['label']} vs {base_arm['label']}" + (f" on {test}" if len(t["tests"]) > 1 else "")
            verdict = arm_verdict(rows[(arm, "BLEU")], rows[(arm, "chrF")], n)
            caveat = "; ".join(x for x in (seeds_caveat(n, sentences_p=True), floor) if x)
            out.append(Effect(model, frozenset(views), verdict, caveat, n, testset=test))
    return out
