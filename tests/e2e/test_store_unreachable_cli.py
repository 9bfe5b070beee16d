"""`augdag run` with its artifacts on an object store that is down or silent (issue 48, defect 7): one line naming the
object and the endpoint, exit 1, and the run recorded failed with that line (it used to be a 198-line traceback and
no run). Through the CLI, against a port that refuses and a loopback socket that accepts and never answers."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import pytest

from tests.conftest import augdag, catalog_rows, free_port

PROFILE = "datasets:\n  train: {kind: bitext, format: text, src: data/train.en, tgt: data/train.de}\n"


@pytest.fixture
def silent_port():
    """A loopback port whose server accepts every connection and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for c in held:
        c.close()


def _run(tmp_path: Path, port: int) -> tuple[object, Path]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data/train.en").write_text("a b\nc d\n", encoding="utf-8")
    (tmp_path / "data/train.de").write_text("x y\nz w\n", encoding="utf-8")
    (tmp_path / "p.yaml").write_text(PROFILE, encoding="utf-8")
    cache = tmp_path / "cache"
    store = {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AUGDAG_ARTIFACTS": "s3://bucket/night",
    }
    sets = ["--set", "storage.read_timeout_s=1", "--set", "storage.retries=1"]
    return augdag(tmp_path, "run", "ingest", "--config", "p.yaml", "--cache", str(cache), *sets, **store), cache


@pytest.mark.parametrize("kind", ["refuses", "silent"])
def test_a_store_that_is_down_or_silent_is_one_line_and_a_failed_run(tmp_path, kind, request):
    port = free_port() if kind == "refuses" else request.getfixturevalue("silent_port")
    done, cache = _run(tmp_path, port)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    why = (
        f"Failed to connect to 127.0.0.1:{port} after \\d+ ms: Could not connect to server"
        if kind == "refuses"
        else "no byte within storage.read_timeout_s = 1 s"
    )
    error = (
        rf"s3://bucket/night/artifacts/read/[0-9a-f]{{32}}/manifest\.json: the object store at http://127\.0\.0\.1:{port} "
        rf"did not answer \({why}; 2 tries, storage\.connect_timeout_s = 10 s\); is it running, and are "
        r"AWS_ENDPOINT_URL and storage\.artifacts right\?"
    )
    resume = r" Resume: augdag retry ingest-\S+ --cache \S+  \(log: \S+; -v shows it here\)"
    assert re.fullmatch(f"error: {error}{resume}", lines[0]), lines[0]
    runs = catalog_rows(cache, "SELECT pipeline, status, summary->>'error' AS error FROM runs")
    assert len(runs) == 1 and runs[0]["pipeline"] == "ingest" and runs[0]["status"] == "failed"
    assert re.fullmatch(error, runs[0]["error"])
