"""The pipeline registry (issue 14): a pipeline registered at run time, outside this repository, joins the
CLI's choices, the nightly's order, the summary and `augdag views`; a wrong stage parameter is exit 2 by key."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from flows.engine import registry
from tests.conftest import REPO, subprocess_env

TOY = '''
"""A toy pipeline from outside the repository: the monolingual rows, shouted."""
import os

import pyarrow as pa
import pyarrow.compute as pc
from prefect import flow

from flows.engine.driver import Run, run_stage
from flows.pipelines.ingest import ingest_dataset
from flows.engine.recording import artifact_rows
from flows.engine.registry import Pipeline, register
from storage.views.docs import Doc
from tasks.runtime.stage import Stage


def shout(rows: pa.Table, *, suffix: str, times: int = 1) -> pa.Table:
    text = pc.utf8_upper(rows["text"])
    for _ in range(times):
        text = pc.binary_join_element_wise(text, suffix, "")
    return pa.table({"uid": rows["uid"], "text": text})


SHOUT = Stage("shout", "1", shout, view="shouted")


@flow(name="toy")
def toy_flow(conf, profile: str = "", config: dict | None = None) -> dict:
    with Run.started(conf, pipeline="toy", profile=profile, config=config) as run:
        name = next(n for n, ds in conf.datasets.items() if ds.kind == "mono")
        mono = ingest_dataset(run, conf, name)
        shouted = run_stage(run, SHOUT, inputs=[mono], params={os.environ.get("TOY_KEY", "suffix"): "!", "times": 2})
    return run.finish(extra={"toy": {"rows": artifact_rows(shouted)}})


register(Pipeline("toy", "toy_pipeline:toy_flow", reads=("ingest",),
                  views={"shouted": Doc("the monolingual rows, shouted", {"uid": "row id", "text": "upper case, !!"})},
                  summary=lambda s: [f"toy: {s['toy']['rows']} rows shouted"]))
'''


@pytest.fixture
def toy(prefect_harness, tmp_path):
    from prefect.settings import PREFECT_API_URL

    (tmp_path / "toy_pipeline.py").write_text(TOY)
    (tmp_path / "mono.txt").write_text("a cat\nthe dog\na cat\n\n")
    (tmp_path / "toy.yaml").write_text(
        textwrap.dedent("""\
        datasets:
          m: {kind: mono, format: text, path: mono.txt}
        pipelines: [toy, ingest]   # toy reads ingest: the nightly runs ingest first whatever the order here
        """)
    )
    # the session harness's server: a run needs no temporary Prefect server of its own (~20 CPU-s each)
    env = subprocess_env(
        tmp_path,
        AUGDAG_PIPELINES="toy_pipeline",
        PYTHONPATH=f"{REPO}:{tmp_path}",
        COLUMNS="200",
        PREFECT_API_URL=PREFECT_API_URL.value(),
    )

    def augdag(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "flows.cli", *args, "--cache", str(tmp_path / "cache")],
            env={**env, **extra},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    return augdag


def test_registry_lists_the_built_in_pipelines_dependencies_first():
    assert registry.names() == (
        "ingest",
        "self_training",
        "rejuvenation",
        "paraphrase",
        "mt_paraphrase",
        "robustness",
        "train_nmt",
        "epida",
        "train_classifier",
        "c2c",
        "train_slot_tagger",
    )
    assert registry.depends(["train_nmt", "ingest", "rejuvenation"]) == {
        "train_nmt": ["rejuvenation"],
        "ingest": [],
        "rejuvenation": ["ingest"],
    }


def test_registry_refuses_a_pipeline_reading_an_unregistered_one():
    with pytest.raises(Exception, match="pipeline 'x': reads nowhere; unregistered nowhere"):
        registry.register(registry.Pipeline("x", "m:f", reads=("nowhere",)))
    assert "x" not in registry.names()


def test_toy_pipeline_joins_cli_nightly_summary_and_views(toy, tmp_path):
    from storage.catalog import Catalog

    with Catalog(tmp_path / "cache").write():  # a catalog before any run (no catalog at all is another error)
        pass
    helped = toy("run", "--help")
    assert (
        "one of: ingest, self_training, rejuvenation, paraphrase, mt_paraphrase, robustness, train_nmt, epida, "
        "train_classifier, c2c, train_slot_tagger, toy"
    ) in " ".join(helped.stdout.split())
    before = toy("views", "shouted")  # documented before it exists
    assert before.returncode == 2
    assert "not in this catalog until its stage has run: the monolingual rows, shouted" in " ".join(before.stderr.split())

    night = toy("nightly", "--config", "toy.yaml")
    assert night.returncode == 0, night.stdout + night.stderr
    assert "toy: 2 rows shouted" in night.stdout  # 4 lines: one empty (rejected), one duplicate (dropped)
    rows = (
        Catalog(tmp_path / "cache")
        .query("SELECT pipeline, started_at, finished_at FROM runs WHERE pipeline <> 'nightly' ORDER BY started_at")
        .to_pylist()
    )
    assert [r["pipeline"] for r in rows] == ["ingest", "toy"] and rows[0]["finished_at"] <= rows[1]["started_at"]
    shouted = toy("sql", "SELECT text FROM shouted ORDER BY text", "-f", "csv")
    assert shouted.stdout.splitlines() == ['"text"', '"A CAT!!"', '"THE DOG!!"']
    listed = toy("views")
    table = [[cell.strip() for cell in line.split("│")[1:-1]] for line in listed.stdout.splitlines() if line.startswith("│")]
    assert ["shouted", "view", "2", "the monolingual rows, shouted"] in table, listed.stdout


def test_misspelt_stage_parameter_is_exit_2_by_key_before_any_shard(toy, tmp_path):
    from storage.catalog import Catalog

    done = toy("run", "toy", "--config", "toy.yaml", TOY_KEY="sufix")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: stage 'shout': parameter 'suffix' is required; parameter 'sufix' is not one of suffix, times" in " ".join(
        done.stderr.split()
    )
    shards = Catalog(tmp_path / "cache").query("SELECT count(*) AS n FROM stage_runs WHERE stage = 'shout'")
    assert shards.to_pylist() == [{"n": 0}]  # nothing was submitted, so nothing was retried


def test_stage_bind_types_parameters_and_checks_the_signature():
    from conf.errors import ConfError
    from tasks.ingest.clean import CLEAN, CleanParams
    from tasks.runtime.stage import Stage

    def scale(rows: pa.Table, cut: pa.Table, *, factor: float, model_path: str) -> pa.Table:
        return rows

    stage = Stage("scale", "1", scale)
    bound = stage.bind({"factor": "2.5"}, n_inputs=1, side=["cut"], resources=["model_path"])
    assert bound.model_dump() == {"factor": 2.5}  # validated and typed: the fingerprint hashes this dump
    with pytest.raises(
        ConfError,
        match=r"^stage 'scale': parameter 'factor' is invalid: Input should be a valid "
        r"number, unable to parse string as a number \(found 'big'\)$",
    ):
        stage.bind({"factor": "big"}, n_inputs=1, side=["cut"], resources=["model_path"])
    with pytest.raises(
        ConfError,
        match=r"^stage 'scale': scale\(\) does not take these inputs: "
        r"multiple values for argument 'cut'$",
    ):
        stage.bind({"factor": 1}, n_inputs=2, side=["cut"], resources=["model_path"])
    params = CleanParams(dedup=True, min_tokens=1, max_tokens=9, max_ratio=2.0, kind="bitext")
    assert CLEAN.bind(params, n_inputs=1, side=["duplicates"]).model_dump(mode="json", exclude_unset=True) == {
        "dedup": True,
        "min_tokens": 1,
        "max_tokens": 9,
        "max_ratio": 2.0,
        "kind": "bitext",
    }


def test_a_failed_run_adds_no_pipeline_summary_lines():
    """A run that failed never reached its pipeline's results: the summary printer must not look for them
    (a KeyError there turned one-line failures into tracebacks)."""
    assert registry.summary_lines({"pipeline": "train_nmt", "status": "failed", "error": "boom", "stages": []}) == []
