"""The teacher's gate through the CLI (issue 47, defect 4), in `make test-e2e` (a teacher trained twice, ~70 CPU-s):
the gate's rules and the synthetic filters are tests/pipelines/self_training/test_synthetic_filters.py."""

from __future__ import annotations

import re

import pytest

from demo import write_demo
from tests.conftest import REPO, augdag, catalog_rows


@pytest.mark.slow
def test_cli_run_fails_on_a_weak_teacher_and_warns_with_on_weak_warn(tmp_path):
    """`augdag run self_training` on the demo with a 10-update teacher (BLEU ~0 on its training pairs): exit 2 with one
    line; again with on_weak: warn, the run completes, warns, and counts each synthetic filter's drops."""
    write_demo(tmp_path / "data", seed=0, bitext_rows=300, mono_rows=200, labeled_rows=10, slots_rows=10)
    cache = tmp_path / "c"
    sets = [
        "self_training.teacher.train.max_update=10",
        "self_training.aligner.iterations=2",
        "self_training.filter.lm_drop=0",
        "self_training.teacher.threads=1",
    ]
    args = ["run", "self_training", "--config", str(REPO / "conf" / "demo.yaml"), "--cache", str(cache)]
    env = {"AUGDAG_DEMO_DATA": str(tmp_path / "data")}
    failed = augdag(tmp_path, *args, *(a for s in sets for a in ("--set", s)), **env)
    assert failed.returncode == 2, failed.stderr
    bleu = catalog_rows(cache, "SELECT score FROM evaluations WHERE model_name = 'teacher' AND metric = 'BLEU'")[0]["score"]
    assert bleu < 5
    line = (
        f"self_training.teacher.min_bleu: the teacher scores BLEU {bleu:.2f} on 200 pairs of `demo_bitext` (its training "
        "data: an upper bound of what it does on new text), under the minimum 5"
    )
    [error] = [x for x in failed.stderr.splitlines() if "min_bleu" in x]
    assert error.startswith(  # then the CLI's "Once the input is fixed: augdag retry <run>"
        f"error: {line}: its translations would be degenerate training data. Hint: train it longer or larger "
        "(self_training.teacher.train.max_update) or configure a stronger model (self_training.teacher.model), or set "
        "self_training.teacher.on_weak: warn to go on Once the input is fixed: augdag retry self_training-"
    )
    assert catalog_rows(cache, "SELECT count(*) AS n FROM artifacts WHERE stage = 'teacher_translate'") == [{"n": 0}]
    warned = augdag(tmp_path, *args, *(a for s in [*sets, "self_training.teacher.on_weak=warn"] for a in ("--set", s)), **env)
    assert warned.returncode == 0, warned.stderr
    assert f"warning: {line}; on_weak: warn, so its translations are used" in warned.stderr.splitlines()
    dropped = catalog_rows(cache, "SELECT reason, count(*) AS n FROM dropped WHERE stage = 'synthetic_clean' GROUP BY reason")
    translated = catalog_rows(cache, "SELECT count(*) AS n FROM sampled_mono")[0]["n"]
    kept = catalog_rows(cache, "SELECT count(*) AS n FROM synthetic")[0]["n"]
    assert translated == kept + sum(r["n"] for r in dropped)
    import json

    import flows.pipelines  # noqa: F401 — registers the pipelines' summary lines
    from flows.engine import registry

    run = catalog_rows(cache, "SELECT summary FROM runs WHERE status = 'completed'")[0]
    [summary] = [x for x in registry.summary_lines(json.loads(run["summary"])) if x.startswith("synthetic filters [demo_mono]")]
    counts = {w: int(n.replace(",", "")) for n, w in re.findall(r"(\d[\d,]*) (\w+)", summary.split(": ", 1)[1].split(";")[0])}
    assert counts == {
        "translated": translated,
        **{r["reason"]: r["n"] for r in dropped},
        "kept": kept,
    }
    assert summary.endswith("; language_id target side in 'de'")
