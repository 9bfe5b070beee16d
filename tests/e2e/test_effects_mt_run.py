"""scripts/device_effects.sh at its tiny size (issue 50): conf/effects_mt.yaml's three nights through augdag's own
commands, on made-up data in Multi30k's layout; what comes back is the effect table (every arm on every test set),
every student's score and the night's page. The numbers of 10-update models mean nothing: the test checks the
plumbing and the table's shape and arithmetic."""

from __future__ import annotations

import csv
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.conf.test_effects_mt import SCRIPT, multi30k_like
from tests.conftest import REPO, augdag, subprocess_env

ARMS = ["baseline", "para_10_1_ct", "rejuvenated", "robust", "syn_random", "syn_uncertainty"]
TESTS = ["test2016", "test2016+TitleCase", "test2016+UpperCase", "test2017"]


@pytest.mark.timeout(2700)  # three nights of 10-update models: ~4 min on 2 cores, 10+ when they are shared,
# 20+ on a host half as fast (stop 54's CI)
def test_the_tiny_size_runs_every_arm_and_brings_back_the_table_scores_and_page(tmp_path):
    data, out = multi30k_like(tmp_path), tmp_path / "out"
    done = subprocess.run(
        [str(SCRIPT), "--size", "tiny", "--no-install", "--data", str(data), "--out", str(out)],
        env=subprocess_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=2600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for method in ("random", "uncertainty"):  # each self_training night's synthetic pairs, src<TAB>tgt
        lines = (out / "synthetic" / f"syn_{method}.tsv").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 40 and all(len(line.split("\t")) == 2 for line in lines)
    with (out / "effects.tsv").open(encoding="utf-8") as f:
        table = list(csv.DictReader(f, delimiter="\t"))
    assert [(r["testset"], r["metric"], r["arm"]) for r in table] == [
        (t, m, a) for t in TESTS for m in ("BLEU", "chrF") for a in ARMS
    ]
    base = {(r["testset"], r["metric"]): float(r["mean"]) for r in table if r["arm"] == "baseline"}
    for r in table:  # delta is the arm's mean minus the baseline's (all three rounded to 2 places: within 0.01 of the
        # rounded means' difference); the baseline has no p against itself
        assert abs(float(r["delta"]) - (float(r["mean"]) - base[(r["testset"], r["metric"])])) <= 0.0101
        assert (r["p"] == "") == (r["arm"] == "baseline") and r["seeds"] == "1"
    scores = pq.read_table(out / "evaluations.parquet")
    students = [r for r in scores.to_pylist() if r["model_name"] in ("student", "student_continued")]
    assert {(r["arm"], r["testset"], r["metric"]) for r in students} == {
        (a, t, m) for a in ARMS for t in TESTS for m in ("BLEU", "chrF")
    }
    assert (out / "report" / "index.html").is_file()
    assert (out / "overrides.txt").read_text(encoding="utf-8").splitlines()[0] == "size: tiny"

    # an arm whose entry selects nothing would be another arm under a new name: refused, naming the key
    sets = [a for s in (out / "overrides.txt").read_text(encoding="utf-8").splitlines()[1:] for a in ("--set", s)]
    empty = "train_nmt.experiments.syn_random.mix.synthetic=\"SELECT src, tgt FROM bitext WHERE source = 'syn_randm'\""
    refused = augdag(
        tmp_path,
        "run",
        "train_nmt",
        "--config",
        str(REPO / "conf" / "effects_mt.yaml"),
        "--cache",
        str(out / "cache"),
        *sets,
        "--set",
        empty,
        AUGDAG_EFFECTS_DATA=str(data),
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "train_nmt.experiments.syn_random.mix.synthetic: the query selected no rows" in refused.stderr
