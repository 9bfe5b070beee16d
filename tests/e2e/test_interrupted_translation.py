"""SIGINT while a student translates, through the CLI (issue 47, defect 5), in `make test-e2e`: the run stops at the
next batch, is recorded `interrupted`, and its last line says how to resume; the translation's artifact is never
finished. The stop itself (progress, `Interrupted`, the stop request) is tested in-process in
tests/engine/test_interrupted_run.py and tests/models/test_nmt_fairseq.py.

The signal goes to the augdag process (`kill -INT`, a scheduler), not to its whole process group as a terminal's
Ctrl-C does: there Prefect's embedded server, a child in the same group, dies of it too, and the process then waits
on Prefect's client retrying the dead API (measured: still running 60 s later, the run already recorded
`interrupted` in the catalog). Not solved yet: see issue 47's note."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from demo import write_demo
from tests.conftest import augdag, catalog_rows, subprocess_env


def test_sigint_during_translation_leaves_an_interrupted_run_and_its_resume_line(tmp_path):
    data, cache = tmp_path / "data", tmp_path / "cache"
    # 5,000 test sentences for a 2-update student decoding natively with beam 5: it translates for minutes
    write_demo(data, seed=1, bitext_rows=300, mono_rows=10, labeled_rows=10, slots_rows=10, test_rows=5000, bad_rows=False)
    profile = tmp_path / "p.yaml"
    profile.write_text(
        f"""pipelines: [ingest, train_nmt]
heldout: {{allow_overlap: [demo_test]}}  # the grammar repeats test sentences in training: not what this is about
datasets:
  demo_bitext: {{kind: bitext, format: text, src: {data}/train.en, tgt: {data}/train.de}}
  demo_test: {{kind: bitext, format: text, src: {data}/test.en, tgt: {data}/test.de}}
train_nmt:
  tests: [demo_test]
  mix: {{bitext: "SELECT src, tgt FROM bitext"}}
  student: {{threads: 1, inference: native, train: {{max_update: 2, warmup_updates: 1}}}}
"""
    )
    assert augdag(tmp_path, "run", "ingest", "--config", str(profile), "--cache", str(cache)).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "run", "train_nmt", "--config", str(profile), "--cache", str(cache)],
        env=subprocess_env(tmp_path, COLUMNS="200"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, killed whole if the test fails
    )
    try:
        deadline = time.monotonic() + 300
        while not list(Path(cache, "models", "fairseq").glob("*/model/checkpoint.pt")):  # the student is trained
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(5)  # into the translation of the test set
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    last = " ".join(err.split())
    assert "interrupted by SIGINT; the shards it finished are kept" in last and "Resume: augdag retry train_nmt-" in last
    runs = catalog_rows(cache, "SELECT pipeline, status FROM runs ORDER BY started_at")
    assert [(r["pipeline"], r["status"]) for r in runs] == [("ingest", "completed"), ("train_nmt", "interrupted")]
    assert not list(Path(cache, "artifacts").glob("translate_student/*/manifest.json"))  # stopped before it finished
