"""SIGINT while a student translates, through the CLI (issue 47, defect 5), in `make test-e2e`: the run stops at the
next batch, is recorded `interrupted`, and its last line says how to resume; the translation's artifact is never
finished. The stop itself (progress, `Interrupted`, the stop request) is tested in-process in
tests/engine/test_interrupted_run.py and tests/models/test_nmt_fairseq.py.

The signal goes to the augdag process (`kill -INT`, a scheduler) and to its whole process group, as a terminal's
Ctrl-C does. Before flows/ops/ephemeral.py, Prefect's temporary server, a child in the same group, died of the
latter too, and the process then waited on Prefect's client retrying the dead API (still running 60 s later, the run
already recorded `interrupted`). The server, in its own session, must also be gone once augdag has exited, and
when augdag is killed with SIGKILL (its watchdog)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from demo import write_demo
from tests.conftest import augdag, catalog_rows, subprocess_env


def prefect_servers(prefect_home: Path) -> list[int]:
    """The pids of live processes started with ``PREFECT_HOME=prefect_home`` that run uvicorn (a Prefect server)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ, cmdline = (proc / "environ").read_bytes(), (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if f"PREFECT_HOME={prefect_home}".encode() in environ.split(b"\0") and b"uvicorn" in cmdline:
            found.append(int(proc.name))
    return found


def gone_within(pids_of: Callable[[], list[int]], seconds: float) -> list[int]:
    """``pids_of()`` polled until it is empty or ``seconds`` passed: what is left."""
    deadline = time.monotonic() + seconds
    while (left := pids_of()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.parametrize("to", ["pid", "group"])
def test_sigint_during_translation_leaves_an_interrupted_run_and_its_resume_line(tmp_path, to):
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
        assert len(prefect_servers(tmp_path / "prefect-home")) == 1  # the run's temporary Prefect server
        (os.kill if to == "pid" else os.killpg)(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole group
        out, err = proc.communicate(timeout=120)  # a wait on a dead API's retries never ended
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert gone_within(lambda: prefect_servers(tmp_path / "prefect-home"), 10) == []  # stopped at exit
    last = " ".join(err.split())
    assert "interrupted by SIGINT; the shards it finished are kept" in last and "Resume: augdag retry train_nmt-" in last
    runs = catalog_rows(cache, "SELECT pipeline, status FROM runs ORDER BY started_at")
    assert [(r["pipeline"], r["status"]) for r in runs] == [("ingest", "completed"), ("train_nmt", "interrupted")]
    assert not list(Path(cache, "artifacts").glob("translate_student/*/manifest.json"))  # stopped before it finished


def test_the_temporary_server_answers_only_augdag_and_stops_when_augdag_is_killed(tmp_path):
    """The run's temporary server is guarded as `augdag server` is (a foreign Host: 421; a page's Origin: 403), and
    SIGKILL runs no atexit hook: the server, in a session of its own, stops by its watchdog within seconds."""
    code = "from flows.ops.ephemeral import start_ephemeral_server as s; print(s(), flush=True); input()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=subprocess_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        api = proc.stdout.readline().strip()
        assert api.startswith("http://127.0.0.1:")
        hostile = {"Host": "attacker.example", "Origin": "http://attacker.example", "Content-Type": "application/json"}
        refused = httpx.post(f"{api}/flow_runs/filter", headers=hostile, content='{"limit":1}', timeout=30)
        assert (refused.status_code, refused.text) == (421, "misdirected request: this server is not attacker.example\n")
        page = httpx.post(f"{api}/flow_runs/filter", headers={"Origin": "http://evil.example"}, json={"limit": 1}, timeout=30)
        assert page.status_code == 403  # a web page on this machine: no Origin is its own
        assert httpx.post(f"{api}/flow_runs/filter", json={"limit": 1}, timeout=30).status_code == 200  # augdag's client
        servers = prefect_servers(tmp_path / "prefect-home")
        assert len(servers) == 1 and os.getsid(servers[0]) != os.getsid(proc.pid)  # out of reach of a Ctrl-C
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert gone_within(lambda: prefect_servers(tmp_path / "prefect-home"), 15) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
