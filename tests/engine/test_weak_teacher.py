"""A weak teacher is visible (issue 26, defect 9): a warning for a filter that drops most of its input, in
the run's summary and on the terminal; the nightly profile's models at transformer-base size. (The
teacher's score in the summary line: tests/pipelines/self_training/test_flow_self_training.py and test_flow_rejuvenation.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.engine.drop_warnings import drop_warnings, dropped_reasons, stage_warning
from storage.artifacts import ArtifactRef
from tests.conftest import REPO, subprocess_env


def report(
    stage: str, dataset: str | None, rows_in: int, part: int, dropped: int, *, status: str = "computed", kind: str = "artifact"
) -> dict:
    """A stage report as a run's summary keeps it (flows/engine/recording.py StageReport)."""
    return {
        "stage": stage,
        "dataset": dataset,
        "fingerprint": "f" * 32,
        "status": status,
        "shards": 1,
        "shards_computed": 1,
        "rows_in": rows_in,
        "rows_out": {"part": part, "dropped": dropped},
        "seconds": 0.1,
        "error": None,
        "kind": kind,
        "failed_shards": [],
        "shards_known": True,
    }


def never(stage):
    raise AssertionError(f"reasons read for {stage['stage']}, which dropped at most half")


def test_drop_warning_blames_the_teacher_when_length_ratio_drops_most_translations():
    stages = [report("teacher_translate", "abc", 300, 300, 0), report("synthetic_clean", "abc", 300, 26, 274)]
    assert drop_warnings(stages, lambda s: {"length_ratio": 274}) == [
        (
            "length_ratio dropped 91 % of the teacher's translations (274 of 300 rows in synthetic_clean[abc]): "
            "the teacher may be too weak (its BLEU is above; self_training.teacher.train)"
        )
    ]


def test_drop_warning_for_any_stage_lists_its_reasons_largest_first():
    stage = report("clean", "train", 1000, 400, 600)
    assert stage_warning(stage, {"duplicate": 150, "length_ratio": 450}) == (
        "length_ratio (450) and duplicate (150) dropped 60 % of `train` (600 of 1,000 rows in clean[train]): "
        "check the data and the filter's settings (augdag sql \"SELECT reason, detail, count(*) FROM dropped "
        "WHERE stage = 'clean' GROUP BY ALL\")"
    )


def test_drop_warning_names_the_generator_whose_rows_a_selection_drops():
    assert stage_warning(report("c2c_select", "atis", 100, 30, 70), {"in_training": 50, "duplicate": 20}) == (
        "in_training (50) and duplicate (20) dropped 70 % of the generator's rows (70 of 100 rows in "
        "c2c_select[atis]): the generator may be too weak, or repeat its training data (c2c)"
    )


def test_drop_warning_only_above_half_and_not_for_configured_shares():
    assert drop_warnings([report("clean", "train", 1000, 500, 500)], never) == []  # exactly half: no warning
    assert drop_warnings([report("clean", "train", 1000, 499, 501)], lambda s: {"too_long": 501}) == [
        (
            "too_long dropped 50 % of `train` (501 of 1,000 rows in clean[train]): check the data and the filter's "
            "settings (augdag sql \"SELECT reason, detail, count(*) FROM dropped WHERE stage = 'clean' GROUP BY ALL\")"
        )
    ]
    # rejuvenation.inactive_ratio = 0.6, filter.lm_drop = 0.7, `keep` paraphrases per pair: a configured share
    assert drop_warnings([report("active", "train", 1000, 400, 600)], lambda s: {"inactive": 600}) == []
    assert drop_warnings([report("lm_filter", "abc", 100, 30, 70)], lambda s: {"lm_score": 70}) == []
    mixed = report("paraphrased_bitext", "train", 100, 10, 90)  # 40 counted of 100: not over half
    assert drop_warnings([mixed], lambda s: {"over_keep": 50, "jaccard": 40}) == []
    assert (
        drop_warnings([report("clean", "t", 10, 1, 9, status="failed"), report("teacher", None, 0, 0, 0, kind="model")], never)
        == []
    )


def test_drop_warning_counts_a_cached_stage_by_its_rows():
    cached = report("synthetic_clean", "abc", 0, 2, 8, status="cached")  # rows in 0 where a cache hit said so
    assert drop_warnings([cached], lambda s: {"length_ratio": 8}) == [
        (
            "length_ratio dropped 80 % of the teacher's translations (8 of 10 rows in synthetic_clean[abc]): "
            "the teacher may be too weak (its BLEU is above; self_training.teacher.train)"
        )
    ]


def test_drop_warning_reads_a_reports_own_kept_and_dropped_and_needs_a_dropped_part():
    # the duplicates stage: its part is one row per group, its counts say 28,900 of 29,000 rows are duplicates,
    # but it has no dropped part (clean drops them, with the reason, and warns there)
    dups = {**report("duplicates", "train", 29_000, 3, 0), "kept": 100, "dropped": 28_900}
    assert drop_warnings([dups], lambda s: {}) == []
    clean = {**report("clean", "train", 0, 100, 28_900, status="cached"), "kept": 100, "dropped": 28_900}
    assert drop_warnings([clean], lambda s: {"duplicate": 28_900}) == [
        (
            "duplicate dropped 99 % of `train` (28,900 of 29,000 rows in clean[train]): check the data and the "
            "filter's settings (augdag sql \"SELECT reason, detail, count(*) FROM dropped WHERE stage = 'clean' "
            'GROUP BY ALL")'
        )
    ]


def test_dropped_reasons_counts_the_reason_column_of_every_dropped_part(tmp_path):
    ref = ArtifactRef(str(tmp_path), "clean", "a" * 32, n_shards=3)
    ref.dir.mkdir(parents=True)
    pq.write_table(
        pa.table({"uid": ["1", "2", "3"], "reason": ["length_ratio", "duplicate", "length_ratio"]}), ref.path(0, "dropped")
    )
    pq.write_table(pa.table({"uid": ["4"], "reason": ["length_ratio"]}), ref.path(2, "dropped"))  # shard 1: none
    stage = {**report("clean", "train", 10, 6, 4), "fingerprint": "a" * 32, "shards": 3}
    assert dropped_reasons(tmp_path, stage) == {"length_ratio": 3, "duplicate": 1}


@pytest.mark.slow
def test_run_prints_the_drop_warning_and_keeps_it_in_the_summary(prefect_harness, tmp_path):
    """`augdag run ingest` as a user runs it, default mode: 4 of 5 pairs fail the length ratio. Against the session's
    Prefect server, as with `augdag server` running (a temporary server of its own: ~12 CPU-s more)."""
    from prefect.settings import PREFECT_API_URL

    src = ["a b c d e f g h i j", "one two three four five six", "x y z w v u t", "k l m n o p q r", "the cat"]
    tgt = ["a", "eins", "x", "k", "die Katze"]
    (tmp_path / "t.en").write_text("\n".join(src) + "\n")
    (tmp_path / "t.de").write_text("\n".join(tgt) + "\n")
    profile = tmp_path / "p.yaml"
    profile.write_text(f"datasets:\n  t: {{kind: bitext, format: text, src: {tmp_path}/t.en, tgt: {tmp_path}/t.de}}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "flows.cli", "run", "ingest", "--config", str(profile), "--cache", str(tmp_path / "c")],
        env=subprocess_env(tmp_path, COLUMNS="250", PREFECT_API_URL=PREFECT_API_URL.value()),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    line = (
        "length_ratio dropped 80 % of `t` (4 of 5 rows in clean[t]): check the data and the filter's settings "
        "(augdag sql \"SELECT reason, detail, count(*) FROM dropped WHERE stage = 'clean' GROUP BY ALL\")"
    )
    assert f"warning: {line}" in proc.stderr.splitlines()
    from storage.catalog import Catalog

    summary = json.loads(Catalog(tmp_path / "c").query("SELECT summary FROM runs")["summary"][0].as_py())
    assert summary["warnings"] == [line]


def test_nightly_teacher_is_transformer_base_and_the_demo_stays_tiny():
    import flows.pipelines  # noqa: F401 — registers the pipelines the profiles name
    from conf.loader import load_profile

    nightly = load_profile("nightly", environ={"AUGDAG_DATA": "/data"})
    base = nightly.self_training.teacher.train
    assert (
        base.encoder_layers,
        base.decoder_layers,
        base.embed_dim,
        base.heads,
        base.ffn_dim,
        base.dropout,
        base.lr,
        base.warmup_updates,
        base.label_smoothing,
    ) == (6, 6, 512, 8, 2048, 0.1, 5e-4, 4000, 0.1)
    assert base.max_update >= 50_000 and nightly.self_training.teacher.model is None
    assert nightly.rejuvenation.identification.train == base == nightly.train_nmt.student.train
    demo = load_profile(REPO / "conf" / "demo.yaml", environ={"AUGDAG_DEMO_DATA": "/data"})
    tiny = demo.self_training.teacher.train
    assert (tiny.encoder_layers, tiny.embed_dim, tiny.max_update) == (2, 64, 300)
