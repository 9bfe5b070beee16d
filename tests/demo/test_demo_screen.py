"""Issue 50, the demo's screen: `augdag demo` fits one screen (a line per pipeline, one line of totals, the verdict
table with what the demo's size means, the night's report page, three queries); `augdag run` of one pipeline lists
its own stages, not those another pipeline made; the verdict table's rows from hand-built summaries."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from demo.tiny import TINY_SETS
from flows.cli.screen import pipeline_line
from flows.reports.effect_table import NOT_READ, EffectRow, effect_rows, size_note
from storage.catalog import Catalog
from tests.conftest import DEMO_PIPELINES, augdag

SIZE = (
    "Size: the demo's tiny models (2+2-layer, 64-dim students of 10 updates), 1 seed: a check that the plumbing works, "
    "not a measure of the method; see docs/effects.md"
)
REJUVENATION_STAGES = [  # rejuvenation's own stages; ingest's and self_training's are cached from their runs
    "heldout_overlap",
    "translate_validation",
    "evaluate",
    "pair_score",
    "inactive_cut",
    "inactive",
    "active",
    "rejuvenate",
    "rejuvenated",
    "probability_bins",
    "state_properties",
]


def bleu_rows(arm: str, bleu: float, chrf: float, *, delta: tuple[float, float], p: tuple[float, float] | None) -> list[dict]:
    return [
        {"testset": "t", "arm": arm, "metric": m, "seeds": 3, "mean": v, "sd": 0.5, "delta": d, "p_value": 0.01, "p_seeds": ps}
        for m, v, d, ps in zip(("BLEU", "chrF"), (bleu, chrf), delta, p or (None, None))
    ]


def night(seeds: int = 3) -> list[dict]:
    """A night of four pipelines: rejuvenation measured by train_nmt's arm `rejuvenated`, self_training not read."""
    arm = {"seeds": list(range(seeds)), "students": ["s"] * seeds, "continue_on": None}
    return [
        {"pipeline": "ingest", "status": "completed", "seconds": 1.0, "stages": []},
        {
            "pipeline": "self_training",
            "status": "completed",
            "seconds": 2.0,
            "u_max": 0.5,
            "synthetic": {"mono": 40},
            "model_scores": {"teacher": {"model": "teacher", "BLEU": 28.0, "sentences": 200}},
        },
        {
            "pipeline": "rejuvenation",
            "status": "completed",
            "seconds": 12.34,
            "rejuvenation": {
                "active": 90,
                "inactive": 10,
                "validation": {"identification": {"model": "identification", "BLEU": 31.2, "sentences": 200}},
            },
        },
        {
            "pipeline": "train_nmt",
            "status": "completed",
            "seconds": 60.0,
            "train_nmt": {
                "baseline": "bitext",
                "tests": ["t"],
                "arms": {
                    "bitext": {"label": "bitext", "mix": {"bitext": "SELECT src, tgt FROM bitext"}, **arm},
                    "rejuvenated": {"label": "rejuvenated", "mix": {"r": "SELECT src, tgt FROM rejuvenated"}, **arm},
                },
                "summary": bleu_rows("bitext", 30.0, 55.0, delta=(0.0, 0.0), p=None)
                + bleu_rows("rejuvenated", 31.2, 55.8, delta=(1.2, 0.8), p=(0.031, 0.2)),
            },
        },
    ]


def test_effect_rows_name_each_augmentation_its_arm_and_the_p_that_decided_issue_50():
    assert effect_rows(night()) == [
        EffectRow("self_training", "40 synthetic pairs", "-", NOT_READ, ""),
        EffectRow(
            "rejuvenation",
            "10 pairs rejuvenated",
            "train_nmt rejuvenated vs bitext",
            "+1.2 BLEU (p = 0.031), +0.8 chrF (p = 0.2)",
            "3 seeds: paired t-test over the seeds' corpus scores",
        ),
    ]
    assert size_note(night(), demo=False) is None  # 3 seeds: the t-test decided, nothing to add
    assert size_note(night(), demo=True, models="m") == (
        "Size: the demo's tiny models (m), 3 seeds: a check that the plumbing works, not a measure of the method; "
        "see docs/effects.md"
    )
    one = night(seeds=1)
    assert effect_rows(one)[1].caveat == "1 seed: p resamples test sentences"
    assert size_note(one, demo=False) == (
        "Size: 1 seed per arm: training variance is not measured, a p resamples test sentences only; use ≥ 3 seeds; "
        "see docs/effects.md"
    )


def test_pipeline_line_is_name_rows_made_seconds_and_the_number_that_matters_issue_50():
    rejuvenation = night()[2]
    assert pipeline_line(rejuvenation) == (
        "rejuvenation           10 pairs rejuvenated    12.3 s  10 of 100 pairs inactive; identification BLEU 31.20 on "
        "200 of its training pairs"
    )
    skipped = {"pipeline": "train_nmt", "status": "skipped", "seconds": 0.0, "error": "upstream pipeline(s) x did not complete"}
    assert pipeline_line(skipped) == "train_nmt          skipped after 0.0 s: upstream pipeline(s) x did not complete"
    short = {"pipeline": "train_nmt", "status": "completed", "seconds": 1.0, "train_nmt": {}}  # printed, not fatal to a night
    assert pipeline_line(short) == "train_nmt              1.0 s  completed; its headline failed: KeyError: 'arms'"


@pytest.mark.slow
@pytest.mark.tiny_demo_run
def test_the_demo_fits_one_screen_with_the_verdict_table_and_the_night_page_issue_50(tiny_demo_run):
    assert tiny_demo_run.returncode == 0, (tiny_demo_run.stdout + tiny_demo_run.stderr)[-3000:]
    lines = tiny_demo_run.stdout.splitlines()
    assert len(lines) < 60, tiny_demo_run.stdout
    assert "│" not in tiny_demo_run.stdout and "┃" not in tiny_demo_run.stdout  # no stage table by default
    catalog = Catalog(tiny_demo_run.cache)
    night_id = catalog.query("SELECT run_id FROM runs WHERE pipeline = 'nightly' ORDER BY started_at DESC LIMIT 1")["run_id"][
        0
    ].as_py()
    end = next(i for i, line in enumerate(lines) if line.startswith(f"nightly run {night_id} (demo): completed in "))
    assert all(line.strip() for line in lines[1:end]), tiny_demo_run.stdout  # no stray print among them
    assert sorted(line.split()[0] for line in lines[1:end]) == sorted(DEMO_PIPELINES)  # one line each, as it finished
    inactive = catalog.query("SELECT count(*) AS n FROM inactive")["n"][0].as_py()
    rejuvenation = next(line for line in lines[1:end] if line.startswith("rejuvenation "))
    assert f" {inactive} pairs rejuvenated " in rejuvenation
    title = "what each augmentation did to the model trained on it, against that model's baseline"
    table = next(i for i, line in enumerate(lines) if line.rstrip() == title)
    assert lines[table + 1].split() == ["augmentation", "rows", "made", "downstream", "model", "effect", "what", "limits", "it"]
    p = catalog.query("SELECT p_value FROM evaluations WHERE model_name = 'student' AND arm = 'rejuvenated' AND metric = 'BLEU'")[
        "p_value"
    ][0].as_py()
    row = next(line for line in lines[table:] if line.startswith("rejuvenation "))
    assert f"{inactive} pairs rejuvenated   train_nmt rejuvenated vs bitext" in row and f" BLEU (p = {p:.2g})" in row
    assert [line.split()[0] for line in lines[table + 3 :] if line[:1].isalpha() and not line.startswith("Size")][:7] == [
        "rejuvenation",
        "paraphrase",
        "self_training",
        "mt_paraphrase",
        "robustness",
        "epida",
        "c2c",
    ]  # every augmentation of the night, in its order
    assert SIZE in lines
    assert f"report: {tiny_demo_run.cache.absolute()}/reports/{night_id}/index.html" in lines
    assert len([line for line in lines if line.startswith("  augdag sql")]) == 3


@pytest.mark.slow
@pytest.mark.tiny_demo_run
def test_a_run_of_one_pipeline_lists_its_own_stages_not_those_another_made_issue_50(tiny_demo_run, tmp_path):
    """`augdag run rejuvenation` over a copy of the tiny demo (every stage cached, replayed): the table lists
    rejuvenation's stages; the 18 that ingest, self_training (or the pipeline that trained the shared model first)
    made are one line; -v lists all 39 (a stage used twice, as ingest's read of demo_test, is a row each time)."""
    cache = tmp_path / "cache"
    shutil.copytree(tiny_demo_run.cache, cache, symlinks=True, ignore=shutil.ignore_patterns("server", "logs", "*.lock"))
    sets = [a for s in TINY_SETS for a in ("--set", s)]
    env = {"AUGDAG_DEMO_DATA": str(cache / "demo-data")}
    done = augdag(tmp_path, "run", "rejuvenation", "--config", "demo", "--cache", str(cache), *sets, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in done.stdout.splitlines()]
    listed = [c[0] for c in cells if c]
    # a stage both pipelines use (the identification model and its validation sample) is rejuvenation's or
    # self_training's, whichever of the night's threads made it first: listed here only in the first case
    extra = [s for s in listed if s not in REJUVENATION_STAGES]
    assert [s for s in listed if s in REJUVENATION_STAGES] == REJUVENATION_STAGES, listed
    assert not {"read", "duplicates", "clean", "filter_chain"} & set(extra)
    others = re.search(r"^\(and (\d+) stage\(s\) cached from (ingest[\w, ]*): -v lists them\)$", done.stdout, re.M)
    assert others and 0 < int(others[1]) <= 39 - len(listed), done.stdout  # -v: 39 (a stage reused is a row again)
    verbose = augdag(tmp_path, "-v", "run", "rejuvenation", "--config", "demo", "--cache", str(cache), *sets, **env)
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    stages = [c[0] for c in ([c.strip() for c in line.split("│")[1:-1]] for line in verbose.stdout.splitlines()) if c]
    summary = json.loads(Catalog(cache).query("SELECT summary FROM runs ORDER BY started_at DESC LIMIT 1")["summary"][0].as_py())
    assert len(stages) == len(summary["stages"]) == 39 and {"read", "clean", "align"} | set(REJUVENATION_STAGES) <= set(stages)
    assert "(and " not in verbose.stdout
