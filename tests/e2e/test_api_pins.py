"""The public Python API (augdag/) as a user's training script uses it, in its own process (issue 49).

Two nights of `augdag run ingest` on one cache, the second on other data; a script that imports ``augdag`` reads the
``bitext`` view pinned to the first night, unpinned, and with a condition that writes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storage.catalog import Catalog
from tests.conftest import augdag, subprocess_env

SCRIPT = """
import hashlib, json, sys
import pyarrow as pa
import augdag

cache = augdag.open(sys.argv[1])
pin = sys.argv[2]
where = sys.argv[3] or None
try:
    cache = cache.latest(pin[len("latest:"):]) if pin.startswith("latest:") else cache.run(pin) if pin else cache
    view = cache.view("bitext", columns=["src", "tgt", "line"], where=where)
    table = view.to_arrow()
except augdag.Error as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(2)
sink = pa.BufferOutputStream()
with pa.ipc.new_stream(sink, table.schema) as writer:
    writer.write_table(table)
print(json.dumps({"run": cache.run_id, "rows": table.to_pylist(), "sha256": hashlib.sha256(sink.getvalue()).hexdigest(),
                  "info": view.info()["artifacts"]}))
"""


def night(tmp_path: Path, src: str, tgt: str, url: str) -> str:
    """One `augdag run ingest` of the dataset ``pair`` (its files rewritten: another night's data); its run id."""
    (tmp_path / "x.en").write_text(src)
    (tmp_path / "x.de").write_text(tgt)
    done = augdag(tmp_path, "-q", "run", "ingest", "--config", str(tmp_path / "p.yaml"), "--cache", "cache", PREFECT_API_URL=url)
    assert done.returncode == 0, done.stdout + done.stderr
    return Catalog(tmp_path / "cache").query("SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1")["run_id"][0].as_py()


def read(tmp_path: Path, pin: str = "", where: str = "") -> subprocess.CompletedProcess:
    """The script above, as a user runs it: ``python script.py CACHE PIN WHERE``."""
    return subprocess.run(
        [sys.executable, str(tmp_path / "train.py"), str(tmp_path / "cache"), pin, where],
        env=subprocess_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def ok(done: subprocess.CompletedProcess) -> dict:
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_a_read_pinned_to_a_night_is_byte_identical_after_the_next_night_and_refused_once_collected_issue_49(
    prefect_harness, tmp_path
):
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "p.yaml").write_text(
        f"datasets:\n  pair:\n    kind: bitext\n    format: text\n    src: {tmp_path}/x.en\n    tgt: {tmp_path}/x.de\n"
    )
    run_a = night(tmp_path, "a b\nc d\na b\ne f\n", "u v\nw x\nu v\ny z\n", url)
    first = ok(read(tmp_path, run_a))
    assert first["run"] == run_a
    assert first["rows"] == [
        {"src": "a b", "tgt": "u v", "line": 1},
        {"src": "c d", "tgt": "w x", "line": 2},
        {"src": "e f", "tgt": "y z", "line": 4},
    ]
    assert ok(read(tmp_path))["rows"] == first["rows"]  # unpinned, before the second night: the same rows

    run_b = night(tmp_path, "g h\ni j\n", "p q\nr s\n", url)
    gc = augdag(tmp_path, "gc", "--cache", "cache")
    assert gc.returncode == 0, gc.stdout + gc.stderr
    again = ok(read(tmp_path, run_a))
    assert (again["rows"], again["sha256"], again["info"]) == (first["rows"], first["sha256"], first["info"])
    current = ok(read(tmp_path))
    assert current["run"] is None
    assert current["rows"] == [{"src": "g h", "tgt": "p q", "line": 1}, {"src": "i j", "tgt": "r s", "line": 2}]
    assert ok(read(tmp_path, "latest:ingest"))["run"] == run_b
    assert ok(read(tmp_path, run_b))["sha256"] == current["sha256"]

    # a condition that writes is refused, in one line, before anything is read
    refused = read(tmp_path, run_a, "line > 0; DELETE FROM runs")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "error: where= takes one condition on the rows of bitext, found more: 'line > 0; DELETE FROM runs'. "
        "Hint: where= \"source = 'wmt22' AND length(src) < 200\" (no `;`, ORDER BY or LIMIT)\n"
    )
    writes = read(tmp_path, "", "src IN (SELECT * FROM query('DELETE FROM runs'))")
    assert (writes.returncode, writes.stderr.splitlines()[0][:80]) == (
        2,
        "error: refused: `augdag sql` is read-only and query() may write, change a settin",
    )
    assert len(writes.stderr.splitlines()) == 1
    assert Catalog(tmp_path / "cache").query("SELECT count(*) AS n FROM runs")["n"][0].as_py() == 2

    # night A's bitext artifact collected: its pin fails in one line naming the run and the artifact; B's reads on
    clean = list(first["info"])
    assert len(clean) == 1 and clean[0].startswith("clean/")
    shutil.rmtree(tmp_path / "cache" / "artifacts" / clean[0])
    gone = read(tmp_path, run_a)
    assert (gone.returncode, gone.stdout) == (2, "")
    assert gone.stderr == (
        f"error: run {run_a}: artifact {clean[0]} (view bitext, 3 row(s)) was collected: "
        f"{tmp_path}/cache/artifacts/{clean[0]}/manifest.json is gone. Hint: pin a later run (`augdag runs`), or read the "
        "current views (a cache without .run/.latest)\n"
    )
    assert ok(read(tmp_path, run_b))["sha256"] == current["sha256"]
    assert first["sha256"] != current["sha256"]
